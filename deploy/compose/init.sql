-- The compose database: the shop's tables with a few rows, a role for Tributary that may
-- replicate and read them, and the publication it reads (created here, by the tables' owner).
-- The PostgreSQL image runs this once, when its volume is empty.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tributary') THEN
        -- A local try's password; docker-compose.yml gives Tributary the same one.
        CREATE ROLE tributary LOGIN REPLICATION PASSWORD 'tributary-local';
    END IF;
END
$$;

CREATE TABLE public.customers (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    email text NOT NULL
);

CREATE TABLE public.orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES public.customers (id),
    status text NOT NULL,
    amount numeric(10, 2) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Unchanged large values arrive whole with the old row.
ALTER TABLE public.customers REPLICA IDENTITY FULL;
ALTER TABLE public.orders REPLICA IDENTITY FULL;

GRANT SELECT ON public.customers, public.orders TO tributary;
CREATE PUBLICATION tributary_shop FOR TABLE public.orders, public.customers;

INSERT INTO public.customers VALUES
    (1, 'Ann', 'ann@example.com'),
    (2, 'Bob', 'bob@example.com');
INSERT INTO public.orders (id, customer_id, status, amount) VALUES
    (1, 1, 'paid', 19.90),
    (2, 2, 'shipped', 120.00);
